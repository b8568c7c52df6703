//! Which backend runs a session: the fallback rules of SPEC B3, B5–B9, as one
//! pure function. Nothing else in the server knows these rules.

use std::fmt;

use sandbox_plugin_api::{ProbeReport, SandboxBackend};

/// `--sandbox` / `CC_SERVER_SANDBOX` (SPEC B5): an opt-out, never a requirement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SandboxSwitch {
    /// Wrap when the host offers a backend.
    #[default]
    On,
    /// Never wrap.
    Off,
}

impl std::str::FromStr for SandboxSwitch {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            other => Err(format!(
                "`{other}` is not a sandbox switch; use `on` or `off`"
            )),
        }
    }
}

/// The host platform, as far as backend choice cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    /// Linux, WSL2 included.
    Linux,
    /// macOS.
    MacOs,
    /// Windows and everything else (SPEC B9).
    Other,
}

impl Platform {
    /// The platform this binary was built for.
    pub fn current() -> Self {
        match std::env::consts::OS {
            "linux" => Self::Linux,
            "macos" => Self::MacOs,
            _ => Self::Other,
        }
    }

    /// The backend `native` means here.
    pub fn native_backend(self) -> Option<&'static str> {
        match self {
            Self::Linux => Some("bwrap"),
            Self::MacOs => Some("seatbelt"),
            Self::Other => None,
        }
    }
}

/// What was asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request<'a> {
    /// The server-wide switch.
    pub switch: SandboxSwitch,
    /// A backend named for this session or run (`--backend`, the API).
    pub explicit: Option<&'a str>,
    /// The server's configured default, used when nothing is explicit.
    pub configured_default: Option<&'a str>,
}

/// A backend that was found, with its probe.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// Its name.
    pub name: &'a str,
    /// What its probe said.
    pub report: &'a ProbeReport,
}

/// The backend chosen, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The backend's name.
    pub backend: String,
    /// The isolation it gives, for the badge.
    pub kind: SandboxBackend,
    /// Why this one.
    pub reason: Reason,
}

/// Why a backend was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// `--sandbox off`; `ignored` is a backend that was asked for anyway.
    Disabled {
        /// The explicit request the switch overrode.
        ignored: Option<String>,
    },
    /// The backend asked for by name.
    Requested,
    /// Nothing asked for; the platform's native sandbox is available.
    NativeDefault,
    /// Nothing asked for; no native sandbox here.
    NoNative {
        /// Why not, and what to install.
        hint: String,
    },
    /// The configured default.
    ConfiguredDefault,
    /// The configured default is unavailable; stepped down (SPEC B7).
    SteppedDown {
        /// The configured default.
        from: String,
        /// Why it is unavailable.
        why: String,
    },
    /// A name no backend answers to: `none`, as SPEC B6 says.
    UnknownName {
        /// The name asked for.
        name: String,
        /// The names that exist.
        known: Vec<String>,
    },
}

/// An explicit request that cannot be honoured. Never silently downgraded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// `microvm` was asked for and cannot boot here (SPEC B7).
    #[error("backend `microvm` was requested but cannot run on this host: {why}")]
    MicrovmUnavailable {
        /// The probe's reason.
        why: String,
    },
    /// Another backend was asked for by name and is unavailable.
    #[error("backend `{name}` was requested but is unavailable on this host: {why}")]
    Unavailable {
        /// The backend.
        name: String,
        /// The probe's reason.
        why: String,
    },
}

impl Selection {
    /// The line `cc_server run` prints when the backend is not the one asked
    /// for, or a default stepped down; `None` when there is nothing to say.
    pub fn notice(&self) -> Option<String> {
        let backend = &self.backend;
        match &self.reason {
            Reason::Requested | Reason::NativeDefault | Reason::ConfiguredDefault => None,
            Reason::Disabled { ignored: None } => None,
            Reason::Disabled {
                ignored: Some(asked),
            } => Some(format!(
                "running with backend `{backend}`: the sandbox is switched off (--sandbox off), so `{asked}` is not used"
            )),
            Reason::NoNative { hint } => Some(format!(
                "running with backend `{backend}` (no isolation): no OS-native agent sandbox on this host: {hint}"
            )),
            Reason::SteppedDown { from, why } => Some(format!(
                "running with backend `{backend}`: the configured default `{from}` is unavailable ({why})"
            )),
            Reason::UnknownName { name, known } => Some(format!(
                "running with backend `{backend}` (no isolation): no backend is called `{name}` (found: {})",
                known.join(", ")
            )),
        }
    }
}

fn describe_unavailable(report: &ProbeReport) -> String {
    match (report.note.is_empty(), report.hint.is_empty()) {
        (_, false) => report.hint.clone(),
        (false, true) => report.note.clone(),
        (true, true) => "its probe gave no reason".to_owned(),
    }
}

/// The startup line of SPEC B3: exactly one of three forms.
pub fn startup_line(switch: SandboxSwitch, platform: Platform, offers: &[Offer<'_>]) -> String {
    if switch == SandboxSwitch::Off {
        return "agent sandbox DISABLED by --sandbox off".to_owned();
    }
    match native(platform, offers) {
        Ok(offer) => format!("agent sandbox ON: {}", offer.report.note),
        Err(hint) => format!("no OS-native agent sandbox on this host: {hint}"),
    }
}

/// The platform's native backend if it is available, else why not.
fn native<'a>(platform: Platform, offers: &[Offer<'a>]) -> Result<Offer<'a>, String> {
    let Some(name) = platform.native_backend() else {
        return Err("native sandbox is not offered on this platform".to_owned());
    };
    match offers.iter().find(|o| o.name == name) {
        Some(offer) if offer.report.available => Ok(*offer),
        Some(offer) => Err(describe_unavailable(offer.report)),
        None => Err(format!(
            "the `{name}` backend library ({}sandbox_backend_{name}{}) was not found in the plugins directory",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        )),
    }
}

fn none_selection(reason: Reason) -> Selection {
    Selection {
        backend: "none".to_owned(),
        kind: SandboxBackend::None,
        reason,
    }
}

fn chosen(offer: &Offer<'_>, reason: Reason) -> Selection {
    Selection {
        backend: offer.name.to_owned(),
        kind: offer.report.kind,
        reason,
    }
}

/// Resolves `native` and `docker` (SPEC B6) to the platform's backend name.
fn resolve_alias(name: &str, platform: Platform) -> Option<&str> {
    match name {
        "native" | "docker" => platform.native_backend(),
        other => Some(other),
    }
}

/// Picks the backend for a session (SPEC B5–B9).
///
/// - `--sandbox off` → `none`.
/// - An explicit name → that backend if available; `microvm` or any other
///   named backend that is unavailable is an error (never a silent
///   downgrade); `native`/`docker` mean the platform's native backend; a
///   name no backend answers to → `none`, with a notice.
/// - A configured default → it if available, else a step down to native,
///   else `none`, with a notice.
/// - Nothing → native if available, else `none` — never up to `microvm`.
pub fn select(
    request: Request<'_>,
    platform: Platform,
    offers: &[Offer<'_>],
) -> Result<Selection, SelectError> {
    if request.switch == SandboxSwitch::Off {
        let ignored = request.explicit.filter(|n| *n != "none").map(str::to_owned);
        return Ok(none_selection(Reason::Disabled { ignored }));
    }

    if let Some(asked) = request.explicit {
        if asked == "none" {
            return Ok(none_selection(Reason::Requested));
        }
        let Some(name) = resolve_alias(asked, platform) else {
            return Err(SelectError::Unavailable {
                name: asked.to_owned(),
                why: "native sandbox is not offered on this platform".to_owned(),
            });
        };
        return match offers.iter().find(|o| o.name == name) {
            Some(offer) if offer.report.available => Ok(chosen(offer, Reason::Requested)),
            Some(offer) if name == "microvm" => Err(SelectError::MicrovmUnavailable {
                why: describe_unavailable(offer.report),
            }),
            Some(offer) => Err(SelectError::Unavailable {
                name: name.to_owned(),
                why: describe_unavailable(offer.report),
            }),
            None if name == "microvm" => Err(SelectError::MicrovmUnavailable {
                why: "the microvm backend library was not found in the plugins directory"
                    .to_owned(),
            }),
            None if Some(name) == platform.native_backend() => Err(SelectError::Unavailable {
                name: name.to_owned(),
                why: "its backend library was not found in the plugins directory".to_owned(),
            }),
            None => Ok(none_selection(Reason::UnknownName {
                name: asked.to_owned(),
                known: offers.iter().map(|o| o.name.to_owned()).collect(),
            })),
        };
    }

    let native = native(platform, offers);
    if let Some(default) = request
        .configured_default
        .and_then(|d| resolve_alias(d, platform))
    {
        match offers.iter().find(|o| o.name == default) {
            Some(offer) if offer.report.available => {
                return Ok(chosen(offer, Reason::ConfiguredDefault));
            }
            found => {
                let why = found.map_or_else(
                    || "no backend has that name".to_owned(),
                    |o| describe_unavailable(o.report),
                );
                let reason = Reason::SteppedDown {
                    from: default.to_owned(),
                    why,
                };
                return Ok(match native {
                    Ok(offer) if offer.name != default => chosen(&offer, reason),
                    _ => none_selection(reason),
                });
            }
        }
    }

    Ok(match native {
        Ok(offer) => chosen(&offer, Reason::NativeDefault),
        Err(hint) => none_selection(Reason::NoNative { hint }),
    })
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.backend, self.kind)
    }
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
