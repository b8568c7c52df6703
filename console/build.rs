//! Checks that xterm.js is installed where `src/assets.rs` embeds it from
//! (`include_bytes!`), and fails with the command that installs it: a
//! missing file would otherwise be a bare "couldn't read" error.

use std::path::Path;

/// The third-party files the page uses, from `assets/node_modules`.
const INSTALLED: &[&str] = &[
    "@xterm/xterm/lib/xterm.js",
    "@xterm/xterm/css/xterm.css",
    "@xterm/addon-fit/lib/addon-fit.js",
];

fn main() {
    let assets = Path::new("assets");
    println!("cargo:rerun-if-changed=assets/package-lock.json");
    let mut missing = Vec::new();
    for file in INSTALLED {
        let path = assets.join("node_modules").join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        if !path.is_file() {
            missing.push(path.display().to_string());
        }
    }
    if !missing.is_empty() {
        panic!(
            "the web console's xterm.js assets are not installed ({}): run `.ci/install-deps`, \
             or `npm ci --prefix console/assets` (the versions are pinned in \
             console/assets/package-lock.json)",
            missing.join(", ")
        );
    }
}
