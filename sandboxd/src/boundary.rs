//! What `/v1/metadata` says holds, from the handle of the sandbox really
//! running (SPEC B8): never a boundary that is not there. Without a kernel
//! boundary (the `none` backend, as in a pod that forbids user
//! namespaces) the egress proxies are named as what they then are —
//! variables a command may ignore — and never as a boundary (SPEC E6).

use sandbox_plugin_api::SandboxBackend;
use sandbox_runtime::Session;
use serde_json::{Value, json};

/// The boundary statement and the handle.
pub fn report(session: &Session) -> Value {
    let handle = session.handle();
    json!({
        "backend": handle.backend_name,
        "kernelBoundary": handle.kernel_boundary,
        "boundary": statement(handle.backend, &handle.backend_name),
        "mode": session.mode().as_str(),
        "handle": handle,
    })
}

/// The sentence for a backend (pure).
pub fn statement(backend: SandboxBackend, name: &str) -> String {
    match backend {
        SandboxBackend::None => format!(
            "no sandbox around commands (backend `{name}`): what holds is the pod's own \
             isolation (its RuntimeClass) and cc_server's command policy and guardrails; the \
             file routes act through the jail (beneath the root, the sandbox's rules), but \
             commands run without the create-time guard; the egress proxies are only \
             variables in the commands' environment, which a command may ignore: they are not \
             a boundary here"
        ),
        SandboxBackend::Microvm => format!(
            "a virtual machine (backend `{name}`): its own kernel; egress only through the \
             session's proxies; the command policy and guardrails before every command"
        ),
        SandboxBackend::Native => format!(
            "the platform's sandbox (backend `{name}`, the host's kernel shared): its own \
             mount, pid and network namespaces, seccomp and the create-time guard; egress only \
             through the session's proxies; the command policy and guardrails before every \
             command"
        ),
    }
}

/// A `SANDBOX_*` name that may hold a secret is never served (the
/// contract: metadata is non-sensitive configuration only).
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "KEY",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|w| upper.contains(w))
}
