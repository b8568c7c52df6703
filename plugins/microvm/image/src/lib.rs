//! The microvm guest image, built from Debian packages only
//! (docs/research/microvm.md §4.3): the generic kernel's PVH `vmlinux`, and an
//! uncompressed newc initramfs with the agent as `/init`, static busybox and
//! the virtio/9p modules the agent loads from `/modules.order`.
//!
//! Images live content-addressed in `OUT/<id>/{vmlinux,initrd.cpio,manifest.json}`
//! with `OUT/current` naming the newest. The probe and the engine only need
//! [`verify`] and [`current`]; the rest is the builder.
//!
//! Modules:
//! - [`cpio`], [`elf`], [`modules`], [`initramfs`], [`kernel`], [`manifest`]:
//!   pure functions, unit-tested;
//! - [`debian`]: the only code that runs `apt-cache`, `apt-get`, `dpkg-deb`, `xz`;
//! - [`build`]: puts it together and writes the image atomically.

#![forbid(unsafe_code)]

pub mod build;
pub mod cpio;
pub mod debian;
pub mod elf;
pub mod initramfs;
pub mod kernel;
pub mod manifest;
pub mod modules;

pub use manifest::{Manifest, current, verify};

/// An error and its `source()` chain as one line, `outer: inner: innermost`:
/// how the binary prints a failure. Each error type here names its step and
/// leaves the cause to its source, so this is where the parts are joined.
/// (The plugin API has the same; this crate does not depend on it.)
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}
