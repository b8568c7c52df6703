//! One row per rule of SPEC B5–B9.

use super::*;

fn report(available: bool, kind: SandboxBackend, note: &str, hint: &str) -> ProbeReport {
    ProbeReport {
        available,
        requires_install: !available && !hint.is_empty(),
        note: note.into(),
        hint: hint.into(),
        kernel_boundary: kind == SandboxBackend::Microvm,
        kind,
        capabilities: vec![],
        kept: String::new(),
    }
}

/// The hosts the rows run on.
#[derive(Clone, Copy, Debug)]
enum Host {
    /// bwrap and microvm both work.
    LinuxAll,
    /// bwrap works; microvm cannot boot (our CI host).
    LinuxNoVm,
    /// bwrap missing its packages; microvm works.
    LinuxVmOnly,
    /// Neither works.
    LinuxNothing,
    /// No bwrap library at all.
    LinuxNoBwrapFile,
    /// macOS with sandbox-exec.
    Mac,
    /// Windows: nothing native.
    Windows,
}

const BWRAP_NOTE: &str = "bubblewrap — namespace isolation, no kernel boundary";
const BWRAP_HINT: &str = "install the Debian packages: bubblewrap socat";
const VM_HINT: &str = "ring-0 guest code is emulated by /dev/kvm (PVM)";

fn offers_for(host: Host) -> (Platform, Vec<(&'static str, ProbeReport)>) {
    let none = (
        "none",
        report(true, SandboxBackend::None, "none — no sandbox", ""),
    );
    let fixture = (
        "fixture",
        report(true, SandboxBackend::None, "third-party fixture", ""),
    );
    let bwrap = |ok| {
        (
            "bwrap",
            report(
                ok,
                SandboxBackend::Native,
                BWRAP_NOTE,
                if ok { "" } else { BWRAP_HINT },
            ),
        )
    };
    let vm = |ok| {
        (
            "microvm",
            report(
                ok,
                SandboxBackend::Microvm,
                "QEMU microvm — kernel boundary",
                if ok { "" } else { VM_HINT },
            ),
        )
    };
    let seatbelt = |ok| {
        let hint = if ok {
            ""
        } else {
            "native sandbox is not offered on this platform"
        };
        (
            "seatbelt",
            report(
                ok,
                SandboxBackend::Native,
                "sandbox-exec (Seatbelt) — namespace isolation, no kernel boundary",
                hint,
            ),
        )
    };
    match host {
        Host::LinuxAll => (
            Platform::Linux,
            vec![bwrap(true), none, vm(true), seatbelt(false), fixture],
        ),
        Host::LinuxNoVm => (
            Platform::Linux,
            vec![bwrap(true), none, vm(false), seatbelt(false), fixture],
        ),
        Host::LinuxVmOnly => (
            Platform::Linux,
            vec![bwrap(false), none, vm(true), seatbelt(false)],
        ),
        Host::LinuxNothing => (
            Platform::Linux,
            vec![bwrap(false), none, vm(false), seatbelt(false)],
        ),
        Host::LinuxNoBwrapFile => (Platform::Linux, vec![none]),
        Host::Mac => (
            Platform::MacOs,
            vec![seatbelt(true), none, vm(false), bwrap(false)],
        ),
        Host::Windows => (
            Platform::Other,
            vec![none, vm(false), bwrap(false), seatbelt(false)],
        ),
    }
}

/// What a row expects.
#[derive(Debug)]
enum Want {
    /// This backend, with a notice containing the text (or no notice).
    Pick(&'static str, SandboxBackend, Option<&'static str>),
    /// A loud error containing the text.
    Fail(&'static str),
}

use SandboxBackend::{Microvm, Native, None as NoneKind};
use SandboxSwitch::{Off, On};
use Want::{Fail, Pick};

/// rule, host, switch, explicit request, configured default, expectation.
type Row = (
    &'static str,
    Host,
    SandboxSwitch,
    Option<&'static str>,
    Option<&'static str>,
    Want,
);

#[rustfmt::skip]
fn rows() -> Vec<Row> {
    vec![
        // rule                                                  host                 switch explicit          default           expected
        ("B5: --sandbox off → none",                              Host::LinuxAll,      Off, None,            None,             Pick("none", NoneKind, None)),
        ("B5: --sandbox off beats an explicit request, says so",  Host::LinuxAll,      Off, Some("microvm"), None,             Pick("none", NoneKind, Some("switched off"))),
        ("B5: --sandbox off beats a configured default",          Host::LinuxAll,      Off, None,            Some("microvm"),  Pick("none", NoneKind, None)),
        ("B5: on + unspecified → native when available",          Host::LinuxNoVm,     On,  None,            None,             Pick("bwrap", Native, None)),
        ("B5/B3: on is not a requirement: no native → none",      Host::LinuxNothing,  On,  None,            None,             Pick("none", NoneKind, Some(BWRAP_HINT))),
        ("B3: a missing bwrap library is named",                  Host::LinuxNoBwrapFile, On, None,          None,             Pick("none", NoneKind, Some("sandbox_backend_bwrap"))),
        ("B7: unspecified never steps up to microvm",             Host::LinuxVmOnly,   On,  None,            None,             Pick("none", NoneKind, Some(BWRAP_HINT))),
        ("B7: unspecified prefers native over microvm",           Host::LinuxAll,      On,  None,            None,             Pick("bwrap", Native, None)),
        ("B7: explicit microvm that cannot boot fails loudly",    Host::LinuxNoVm,     On,  Some("microvm"), None,             Fail(VM_HINT)),
        ("B7: explicit microvm fails loudly with no native",      Host::LinuxNothing,  On,  Some("microvm"), None,             Fail("microvm")),
        ("B7: explicit microvm with no microvm library fails",    Host::LinuxNoBwrapFile, On, Some("microvm"), None,           Fail("not found")),
        ("B7: explicit microvm that boots → microvm",             Host::LinuxAll,      On,  Some("microvm"), None,             Pick("microvm", Microvm, None)),
        ("B7: configured microvm default steps down to native",   Host::LinuxNoVm,     On,  None,            Some("microvm"),  Pick("bwrap", Native, Some(VM_HINT))),
        ("B7: configured microvm default, no native → none",      Host::LinuxNothing,  On,  None,            Some("microvm"),  Pick("none", NoneKind, Some("configured default `microvm`"))),
        ("B7: configured microvm default that boots → microvm",   Host::LinuxAll,      On,  None,            Some("microvm"),  Pick("microvm", Microvm, None)),
        ("B7: explicit request beats the configured default",     Host::LinuxAll,      On,  Some("bwrap"),   Some("microvm"),  Pick("bwrap", Native, None)),
        ("B6: docker → native (Linux)",                           Host::LinuxNoVm,     On,  Some("docker"),  None,             Pick("bwrap", Native, None)),
        ("B6: native → native (macOS)",                           Host::Mac,           On,  Some("native"),  None,             Pick("seatbelt", Native, None)),
        ("B6: a configured docker default → native",              Host::LinuxNoVm,     On,  None,            Some("docker"),   Pick("bwrap", Native, None)),
        ("B6: unknown name → none, with a notice",                Host::LinuxAll,      On,  Some("bwarp"),   None,             Pick("none", NoneKind, Some("no backend is called `bwarp`"))),
        ("B6: explicit none → none, no notice",                   Host::LinuxAll,      On,  Some("none"),    None,             Pick("none", NoneKind, None)),
        ("B8: an explicit backend that is unavailable fails",     Host::LinuxNothing,  On,  Some("bwrap"),   None,             Fail(BWRAP_HINT)),
        ("B8: explicit native with no native library fails",      Host::LinuxNoBwrapFile, On, Some("native"), None,            Fail("not found")),
        ("A4: a third-party backend is selected by name",         Host::LinuxAll,      On,  Some("fixture"), None,             Pick("fixture", NoneKind, None)),
        ("B2: macOS unspecified → seatbelt",                      Host::Mac,           On,  None,            None,             Pick("seatbelt", Native, None)),
        ("B9: Windows unspecified → none",                        Host::Windows,       On,  None,            None,             Pick("none", NoneKind, Some("not offered on this platform"))),
        ("B9: Windows explicit native fails loudly",              Host::Windows,       On,  Some("native"),  None,             Fail("not offered on this platform")),
        ("B9: Windows explicit none → none",                      Host::Windows,       On,  Some("none"),    None,             Pick("none", NoneKind, None)),
        ("B9: Windows configured default microvm → none",         Host::Windows,       On,  None,            Some("microvm"),  Pick("none", NoneKind, Some(VM_HINT))),
    ]
}

#[test]
fn selection_table() {
    let mut failures = Vec::new();
    for (rule, host, switch, explicit, configured_default, want) in rows() {
        let (platform, reports) = offers_for(host);
        let offers: Vec<Offer<'_>> = reports
            .iter()
            .map(|(name, report)| Offer { name, report })
            .collect();
        let request = Request {
            switch,
            explicit,
            configured_default,
        };
        let got = select(request, platform, &offers);
        let ok = match (&want, &got) {
            (Pick(name, kind, notice), Ok(sel)) => {
                sel.backend == *name
                    && sel.kind == *kind
                    && match (notice, sel.notice()) {
                        (None, None) => true,
                        (Some(text), Some(line)) => line.contains(text),
                        _ => false,
                    }
            }
            (Fail(text), Err(err)) => err.to_string().contains(text),
            _ => false,
        };
        if !ok {
            let notice = got.as_ref().ok().and_then(Selection::notice);
            failures.push(format!(
                "{rule}\n    want {want:?}\n    got  {got:?}\n    notice {notice:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn startup_line_has_exactly_three_forms() {
    let line = |host, switch| {
        let (platform, reports) = offers_for(host);
        let offers: Vec<Offer<'_>> = reports
            .iter()
            .map(|(name, report)| Offer { name, report })
            .collect();
        startup_line(switch, platform, &offers)
    };
    assert_eq!(
        line(Host::LinuxNoVm, On),
        format!("agent sandbox ON: {BWRAP_NOTE}")
    );
    assert_eq!(
        line(Host::LinuxNothing, On),
        format!("no OS-native agent sandbox on this host: {BWRAP_HINT}")
    );
    assert_eq!(
        line(Host::LinuxAll, Off),
        "agent sandbox DISABLED by --sandbox off"
    );
    assert_eq!(
        line(Host::Windows, On),
        "no OS-native agent sandbox on this host: native sandbox is not offered on this platform"
    );
    assert!(line(Host::Mac, On).starts_with("agent sandbox ON: sandbox-exec (Seatbelt)"));
    assert!(
        !line(Host::LinuxVmOnly, On).contains("ON"),
        "a working microvm does not make the native sandbox ON"
    );
}

#[test]
fn switch_parses_only_on_and_off() {
    assert_eq!("on".parse(), Ok(SandboxSwitch::On));
    assert_eq!("off".parse(), Ok(SandboxSwitch::Off));
    assert!(
        "yes"
            .parse::<SandboxSwitch>()
            .unwrap_err()
            .contains("`on` or `off`")
    );
}
