//! The conformance kit against backends loaded the way the server loads
//! them: dlopen, version gate, layout check, through the ABI.

use std::sync::Arc;

use sandbox_plugin_api::host::{self, BackendObject, PluginLogger};
use sandbox_plugin_api::testkit;

use crate::util::*;

struct Quiet;

impl PluginLogger for Quiet {
    fn log(&self, _plugin: &str, _level: u8, _target: &str, _message: &str) {}

    fn max_level(&self) -> String {
        "off".into()
    }
}

fn load(path: &std::path::Path) -> Vec<BackendObject> {
    host::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .load(Arc::new(Quiet))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .backends
}

/// A3, C4: the `none` library, loaded from its file, passes every check of
/// the kit (event order, exit last, ready first, kill, timeout, stdin,
/// destroy idempotent and final, unknowns tolerated).
#[test]
fn the_none_library_conforms() {
    let backends = load(&none_plugin());
    assert_eq!(backends.len(), 1);
    let failures = testkit::run_on(&backends[0], &testkit::Options::default());
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A4: the out-of-tree backend conforms too (it lists neither stdin nor
/// timeouts, so those checks are skipped for it).
#[test]
fn the_third_party_library_conforms() {
    let backends = load(&fixtures().third_party);
    assert_eq!(backends[0].name(), "fixture");
    let failures = testkit::run_on(&backends[0], &testkit::Options::default());
    assert!(failures.is_empty(), "{failures:#?}");
}
