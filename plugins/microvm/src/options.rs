//! The `[backends.microvm]` choices — accelerator, suspend mode, templates —
//! read from the options the host passes (and `CC_SERVER_MICROVM_ACCEL`).
//! The probe reads them and the engine acts on them; neither owns them.

/// The opt-in to TCG from the environment; beats the config file, as
/// every `CC_SERVER_*` variable does.
pub const ACCEL_ENV: &str = "CC_SERVER_MICROVM_ACCEL";

/// The accelerator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// The default: hardware virtualisation through `/dev/kvm`.
    Kvm,
    /// QEMU's emulator, only when opted in (docs/research/microvm.md §4.2).
    Tcg,
}

impl Accel {
    /// QEMU's name for it (`-accel NAME`).
    pub fn qemu_name(self) -> &'static str {
        match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg",
        }
    }
}

/// An accelerator setting this backend does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccelError {
    #[error("{setting} is `{value}`, which is not an accelerator this backend knows (kvm, tcg)")]
    Unknown {
        setting: &'static str,
        value: String,
    },
    #[error("[backends.microvm] accel is {value}, not a string (kvm or tcg)")]
    NotAString { value: String },
}

/// The accelerator from `CC_SERVER_MICROVM_ACCEL` (when set) or from
/// `[backends.microvm] accel`; `kvm` when neither says. Anything else is
/// an error naming where it came from: a typo must not pass silently.
pub fn accel_choice(options: &serde_json::Value, env: Option<&str>) -> Result<Accel, AccelError> {
    let parse = |value: &str, setting: &'static str| match value {
        "kvm" => Ok(Accel::Kvm),
        "tcg" => Ok(Accel::Tcg),
        other => Err(AccelError::Unknown {
            setting,
            value: other.to_owned(),
        }),
    };
    if let Some(value) = env.filter(|v| !v.is_empty()) {
        return parse(value, ACCEL_ENV);
    }
    match options.get("accel") {
        None | Some(serde_json::Value::Null) => Ok(Accel::Kvm),
        Some(serde_json::Value::String(s)) => parse(s, "[backends.microvm] accel"),
        Some(other) => Err(AccelError::NotAString {
            value: other.to_string(),
        }),
    }
}

/// A `[backends.microvm]` setting that is not understood. The probe keeps
/// it and `launch` refuses with it: the backend is there, the setting wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error(
        "[backends.microvm] suspend = {value} is not understood: use \"pause\" (vCPUs \
         stopped, RAM kept) or \"checkpoint\" (the machine written to a file, QEMU \
         ended, RAM freed)"
    )]
    Suspend { value: String },
    #[error(
        "[backends.microvm] templates = {value} is not understood: use true (start from \
         a saved, booted machine) or false (boot every sandbox)"
    )]
    Templates { value: String },
}

/// Reads `[backends.microvm] templates`.
pub fn templates_choice(options: &serde_json::Value) -> Result<bool, SettingError> {
    match options.get("templates") {
        None | Some(serde_json::Value::Null) => Ok(true),
        Some(serde_json::Value::Bool(on)) => Ok(*on),
        Some(other) => Err(SettingError::Templates {
            value: other.to_string(),
        }),
    }
}

/// What `suspend` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuspendMode {
    /// QMP `stop`: vCPUs halted, RAM kept; always possible.
    Pause,
    /// The machine's state to a file, QEMU ended, RAM freed; refused while
    /// a share is busy in the guest or an egress connection is open.
    Checkpoint,
}

/// Reads `[backends.microvm] suspend` (default `pause`).
pub fn suspend_choice(options: &serde_json::Value) -> Result<SuspendMode, SettingError> {
    match options.get("suspend") {
        None | Some(serde_json::Value::Null) => Ok(SuspendMode::Pause),
        Some(serde_json::Value::String(s)) if s == "pause" => Ok(SuspendMode::Pause),
        Some(serde_json::Value::String(s)) if s == "checkpoint" => Ok(SuspendMode::Checkpoint),
        Some(other) => Err(SettingError::Suspend {
            value: other.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspend_is_pause_unless_checkpoint_is_asked_for() {
        let choice = |v: serde_json::Value| suspend_choice(&serde_json::json!({ "suspend": v }));
        assert_eq!(
            suspend_choice(&serde_json::json!({})),
            Ok(SuspendMode::Pause)
        );
        assert_eq!(choice("pause".into()), Ok(SuspendMode::Pause));
        assert_eq!(choice("checkpoint".into()), Ok(SuspendMode::Checkpoint));
        let wrong = choice("hibernate".into()).unwrap_err().to_string();
        assert!(
            wrong.contains("\"hibernate\"") && wrong.contains("checkpoint"),
            "{wrong}"
        );
        assert!(choice(1.into()).is_err());
    }

    #[test]
    fn templates_are_on_unless_turned_off() {
        assert_eq!(templates_choice(&serde_json::json!({})), Ok(true));
        let choice =
            |v: serde_json::Value| templates_choice(&serde_json::json!({ "templates": v }));
        assert_eq!(choice(false.into()), Ok(false));
        assert_eq!(choice(true.into()), Ok(true));
        assert!(
            choice("no".into())
                .unwrap_err()
                .to_string()
                .contains("true")
        );
    }
}
